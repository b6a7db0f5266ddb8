"""Installing Konduktor's charts with the pinned helm."""
