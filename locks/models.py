"""Resource-lock models. The resource-lock issue adds ResourceLock."""
