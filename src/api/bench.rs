//! `agentd bench api`: placeholder, filled in slice 5.
