"""What a run's reports add up to: headline figures, gates on them, comparisons of runs."""
