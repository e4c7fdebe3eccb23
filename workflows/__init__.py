"""The component registry: import, validation (schema, semantic, scripts), versions, admin."""
