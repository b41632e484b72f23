"""Deployment templates (supervisord), shipped as package data."""
