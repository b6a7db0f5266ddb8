"""Operations over a cluster that commands share: they read the cluster, call the domain's pure decisions and
write the result. The CLI parses arguments, calls these and prints."""
