"""The run's throwaway CA and the TLS/password helpers native specs share."""
