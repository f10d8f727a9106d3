"""The shared core's private modules, below both tiers: the C ABI in Python (``_capi``,
``_loader``, ``_cdef``), integer and block-list conversions (``_cints``,
``_blocklists``, ``_marshal``, ``_buffers``) and call tracing (``_trace``).

The core's public modules (``status``, ``lint``, ``acl``, ``data_type``) stay at the
package root, where their import paths and their classes' ``__module__`` have always
been. docs/design.md draws the layers.
"""
