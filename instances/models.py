"""Instance models. The engine core issue adds Instance, InstanceTransition, Job and the rest."""
