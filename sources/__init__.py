"""Where an input's records come from: pidquota's own Spark streaming sources (Python data
sources) for files, followed files, Kafka topics and the demo's generator. A source knows no
format: it hands each batch to the input's format (``pidquota.formats``), which screens it
where it is read, and keeps the offsets that make a run exactly once."""
