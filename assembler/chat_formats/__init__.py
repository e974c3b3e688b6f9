"""An assembly's messages in the shapes chat APIs take: ``openai`` and ``anthropic``."""
