"""Pickling: ``builtin`` holds the reducers activation registers in ``copyreg.dispatch_table``
(the dict views, modules), ``registry`` the reducer registry, ``per_process`` the per-process
handles."""
