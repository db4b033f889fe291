# bash completion for recycler(1): subcommands, their options, config files
# (-c: *.yaml, *.yml) and the program names of the config given with -c (or
# of /etc/recycler/recycler.yaml). Installed as
# share/bash-completion/completions/recycler; to try it from a checkout:
#   source completion/recycler.bash
# tests/package/check-completion checks that every subcommand and option of
# `recycler SUBCOMMAND --help` is here.

# The program names of a recycler config: the keys under `programs:` (block
# style; the first key's indentation is the programs' level).
_recycler_programs() {
  [ -r "$1" ] || return 0
  awk '
    /^programs:/ { p = 1; level = -1; next }
    p && /^[^ \t#]/ { exit }
    p && /^[ \t]+[A-Za-z0-9_.-]+[ \t]*:/ {
      match($0, /^[ \t]+/); n = RLENGTH
      if (level < 0) level = n
      if (n == level) { sub(/^[ \t]+/, ""); sub(/[ \t]*:.*/, ""); print }
    }' "$1" 2>/dev/null
}

_recycler() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local commands="run check replay status start stop restart recycle signal reload events logs top"
  local common="-h --help -c --config --socket --json"
  local i word sub="" config="" dashdash=0 positionals=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [ -z "$sub" ]; then
      case $word in -*) ;; *) sub=$word ;; esac
      continue
    fi
    case $word in
      --) dashdash=$i; break ;;
      -c | --config) config=${COMP_WORDS[i+1]}; ((i++)) ;;
      --config=*) config=${word#--config=} ;;
      --socket | --name | --memory-max | --restart | --threads | --recycle-at | --checkpoint | \
        --checkpoint-timeout | --max-requests | --max-lifetime | --timeline | --cgroup-root | \
        --metrics | --log-format | --log-level | --program | --seed | -n | --lines | --count | \
        --interval) ((i++)) ;;
      -*) ;;
      *) ((positionals++)) ;;
    esac
  done

  if [ -z "$sub" ]; then
    if [[ $cur == -* ]]; then
      COMPREPLY=($(compgen -W "-h --help -V --version" -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    fi
    return 0
  fi
  # run -- CMD ARG...: the command's own completion is not ours.
  if [ "$dashdash" -gt 0 ]; then
    if [ $((COMP_CWORD - dashdash)) -eq 1 ]; then
      COMPREPLY=($(compgen -c -- "$cur" | sort -u))
    else
      compopt -o default 2>/dev/null
      COMPREPLY=()
    fi
    return 0
  fi
  [ -n "$config" ] || config=/etc/recycler/recycler.yaml
  config=${config/#\~/$HOME}

  case $prev in
    -c | --config)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X '!*.yaml' -- "$cur")
                 $(compgen -f -X '!*.yml' -- "$cur"))
      return 0 ;;
    --socket)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -f -- "$cur"))
      return 0 ;;
    --timeline)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -d -- "$cur"))
      return 0 ;;
    --restart) COMPREPLY=($(compgen -W "always on-failure never" -- "$cur")); return 0 ;;
    --log-format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return 0 ;;
    --log-level) COMPREPLY=($(compgen -W "trace debug info warn error" -- "$cur")); return 0 ;;
    --program) COMPREPLY=($(compgen -W "$(_recycler_programs "$config")" -- "$cur")); return 0 ;;
    --name | --memory-max | --threads | --recycle-at | --checkpoint | --checkpoint-timeout | \
      --max-requests | --max-lifetime | --cgroup-root | --metrics | --seed | -n | --lines | \
      --count | --interval)
      return 0 ;;  # a value of the user's
  esac

  local options=""
  case $sub in
    run)
      options="-h --help -c --config --name --memory-max --restart --threads --recycle-at --leak
               --checkpoint --checkpoint-timeout --max-requests --max-lifetime --timeline
               --cgroup-root --metrics --log-format --log-level --" ;;
    check) options="-h --help -c --config" ;;
    replay) options="-h --help -c --config --program --stop-at-first --seed --budget" ;;
    status | start | stop | restart | recycle | signal | reload) options=$common ;;
    events) options="$common -f --follow -n --lines" ;;
    logs) options="$common -n --lines -f --follow" ;;
    top) options="$common --interval -n --count" ;;
    *) return 0 ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
    return 0
  fi
  case $sub in
    replay)  # the trace: a samples CSV recorded by timeline:
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X '!*.csv*' -- "$cur")) ;;
    status | start | stop | restart | recycle | logs)
      COMPREPLY=($(compgen -W "$(_recycler_programs "$config")" -- "$cur")) ;;
    signal)  # PROGRAM... SIGNAL
      local signals="HUP INT QUIT KILL USR1 USR2 TERM CONT STOP TSTP WINCH"
      if [ "$positionals" -ge 1 ]; then
        COMPREPLY=($(compgen -W "$(_recycler_programs "$config") $signals" -- "$cur"))
      else
        COMPREPLY=($(compgen -W "$(_recycler_programs "$config")" -- "$cur"))
      fi ;;
  esac
  return 0
}
complete -F _recycler recycler
