"""Where ``top`` and ``serve --ssh.targets`` get hosts: feeds over a network (an exporter over
HTTP, an agentless host over SSH), named feeds joined into one fleet (``fleet``), and what a
consumer keeps of them (history, this host's processes, a Prometheus server's past and usage).

Consumers (``top``, ``validate --url``) import from here and never from ``collect`` or ``sim``.
The shape of every feed and of a fleet's news is :mod:`vgpumon.feed`.
"""
