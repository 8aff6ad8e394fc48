"""One module per ``lit-fl`` subcommand. Each exposes ``main(argv) -> int`` and imports what it needs lazily,
so ``lit-fl --help`` and the commands that do not train never pay for importing torch or Lightning."""
