"""The JVM brokers' shared parts: heap flags, Maven Central jars and compiled launchers."""
