"""What the dashboards and alert rules may query: the metric inventory, PromQL name extraction, dashboard lint."""
