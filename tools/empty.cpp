// The shared library is assembled from the layer archives; this file gives it a source.
