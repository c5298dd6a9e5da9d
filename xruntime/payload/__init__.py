"""The stored form of a payload (a job's request, result, fault, progress): how a JSON
text is kept as bytes, and what reads and writes those bytes without the text.

No SQL and no I/O: the store keeps these bytes, the worker makes them, the bindings
answer from them, and the author's API (child jobs, tables) hands them on.

* ``form``: the three stored forms (plain, zlib, compact with packed arrays), ``pack``
  and ``unpack``;
* ``list_join``: a parent's result joined from its children's stored results, without
  decoding them;
* ``stream``: a stored payload read in pieces, for answers written as they are read;
* ``arrays``: the stored form of a result made from NumPy arrays (``job.table``,
  ``job.encoded``).

Nothing is imported with the package: a worker process takes only what it uses.
"""
