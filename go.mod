module github.com/gmig-dev/gmig

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/digitalocean/go-qemu v0.0.0-20250212194115-ee9b0668d242
	github.com/rs/zerolog v1.35.1
	golang.org/x/sys v0.49.0
)

require (
	github.com/NVIDIA/go-nvml v0.13.0-1 // indirect
	github.com/digitalocean/go-libvirt v0.0.0-20220804181439-8648fbde413e // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
)
