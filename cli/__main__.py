"""``python -m cli``: the `shuttle` command without its installed entry point."""

from cli.main import main

main()
