"""mpsuite: measure what mixed precision buys (speed) and costs (accuracy), the same way every time."""

__version__ = "0.1.0"
