// The one source of a precompiled-header donor target (cmake/Pch.cmake): the target
// exists to compile the header its users reuse.
