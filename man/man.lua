-- docs/*.md as a man page. The file's own title (its one `#` heading) goes:
-- the page's title comes from -M title. `##` sections become .SH, in capitals
-- as man pages spell them (NAME is what mandb and whatis look for), and `###`
-- subsections .SS.
function Header(h)
  if h.level == 1 then
    return {}
  end
  h.level = h.level - 1
  if h.level == 1 then
    h = pandoc.walk_block(h, {
      Str = function(s)
        return pandoc.Str(pandoc.text.upper(s.text))
      end,
    })
  end
  return h
end
