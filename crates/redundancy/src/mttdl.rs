//! KVMD §5.1 reliability model (in progress).
