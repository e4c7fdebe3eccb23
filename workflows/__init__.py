"""The component registry: import, validation (JSON Schema + semantic + scripts), versions, admin."""
