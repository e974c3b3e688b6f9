"""The assembler: builds prompt context from a read view under budgets, deterministically."""
