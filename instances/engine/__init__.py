"""The pure engine: pipeline, steps, admission, script sandbox, task executors.

Nothing in this package imports Django REST framework, Celery or Channels.
"""
