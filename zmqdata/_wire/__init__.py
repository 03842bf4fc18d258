"""Wire formats, bytes only (no sockets, nothing of the layers above).

Element frames (:mod:`.frames`, built on :mod:`.schema`, :mod:`.limits`,
:mod:`.encoder` and :mod:`.decoder`), buffer compression (:mod:`.codec`),
control messages (:mod:`.messages`), addresses and processing modes.
"""
