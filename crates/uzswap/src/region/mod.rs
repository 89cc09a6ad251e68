//! The front end: userfaultfd regions, the fault handler, the evictor, the
//! budget. (Front-end helper.)
