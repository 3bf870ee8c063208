"""Built-in hack probes: scripted agents (run in agent sandboxes like every scripted agent) that a
sound environment must not reward. `random` is the studio's random agent; the others are files here."""
