//! Workspace integration tests of rayscale (see `tests/`). This library is empty on
//! purpose: it only anchors the package.
