"""The stateful harness around the gates: retrieval loop, audit log, review queue."""
