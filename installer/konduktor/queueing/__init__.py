"""What a team member sees of the queues: the team's quota and pending order, and why one job waits."""
