"""Adapters of the engine's task ports (instances/engine/ports.py `Publisher`, `StateStore`,
`TaskTargets`) on the brokers and stores of settings: RabbitMQ (kombu, publisher confirms) and
Redis Streams for the pub/sub task (4), Redis for the state-store and cache-aside tasks (17, 18).
`instances.wiring` installs them; the engine never imports kombu or redis."""
