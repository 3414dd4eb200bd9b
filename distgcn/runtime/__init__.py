"""The process around every command: signals that end the whole job, progress lines, fault injection, thread counts."""
