"""Event intake from a broker (`manage.py events_consume`): CloudEvents consumed from RabbitMQ
queues and Redis streams, each routed by `VNEXT["EVENT_ROUTES"]` to `instances.events.
event_deliver`, acknowledged only after its receipt and its work committed (a redelivery is a
no-op), dead-lettered when it can never apply, redelivered when the failure is transient."""
