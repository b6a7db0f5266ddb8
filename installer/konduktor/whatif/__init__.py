"""What-if: replay a job trace against a quota config on a fresh simulated cluster and measure what it did."""
