"""The application layer: what each command does on a cluster, one module one job. An operation reads the cluster,
calls the domain's pure decisions and writes the result; it tells the user what happens through the callbacks it is
given (`say`, `report`, `progress`), never the terminal. The CLI parses arguments, calls these and prints."""
