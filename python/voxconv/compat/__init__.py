"""Compatibility layers that present other sparse-convolution libraries' APIs
on top of voxconv.

Submodules (imported explicitly, never from here, so that each can be added
independently):

* ``voxconv.compat.spconv``      -- spconv 2.x (``spconv.pytorch``) API
* ``voxconv.compat.minkowski``   -- MinkowskiEngine API

See docs/porting.md.
"""
