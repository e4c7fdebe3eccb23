"""Workflow instances: models, the engine, services, API, admin."""
