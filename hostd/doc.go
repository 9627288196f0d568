// Package hostd is gmigd's host side: one pool of graphics memory, the
// vGPUs carved from it, a vfio-user socket per vGPU for QEMU, and the
// control API operators and peers use (HTTP+JSON on a UNIX socket,
// docs/operator-guide.md).
//
// hostd wires the packages below it together; nothing below imports hostd.
// Lock order: Host.mu, then anything a vGPU takes.
package hostd
