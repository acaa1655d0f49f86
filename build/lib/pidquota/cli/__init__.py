"""The ``pidquota`` command line: the top layer, one module per command."""
