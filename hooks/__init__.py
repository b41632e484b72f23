"""Agent-host integration: the prompt-submit hook client and host configuration files."""
