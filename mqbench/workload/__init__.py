"""The open-loop load engine: schedules, publishers, subscribers, worker processes."""
