"""Django's PostgreSQL backend with a health check that needs no round trip while the server
has sent nothing (`vnext.postgresql.base`)."""
