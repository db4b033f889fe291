"""python3 -m recycler_notify KEY=VALUE...: one message to $NOTIFY_SOCKET, from a shell."""

import sys

from recycler_notify import _main

sys.exit(_main(sys.argv[1:]))
