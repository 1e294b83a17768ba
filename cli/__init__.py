"""The `shuttle` command: `main` parses it, `launcher` starts the processes for `shuttle up`,
`client` talks to a running gateway."""
