"""What jobctl installs on a jobs table, checks and removes (layer 3).

``apply`` plans ``schema apply`` and ``schema grants`` as ``steps``, each locking step under
short lock tries, run on the server or printed as a psql script; ``migrations`` holds the
history's migrations and the baseline a fresh install runs instead, ``history`` its trigger
per mode and the columns each mode keeps; ``check`` is the pre-flight checklist;
``remove`` the way back out. ``shape``, ``statuses`` and ``unserved`` read the user's table
from the catalog and say what jobctl refuses; ``versions`` and ``ownership`` refuse a newer
install and objects jobctl did not make. Nothing here prints or decides a workflow.
"""
