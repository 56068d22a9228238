"""course_lib: the tested helpers every lesson of the large-batch course imports.

One concept per module (see README.md for the map). Importing the package does no
work beyond definitions: no seeding, no rcParams, no device touched.
"""

__version__ = "0.1.0"
