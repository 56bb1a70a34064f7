# Makefile: the operator's builds, each one command; everything else is
# `go build`, `go test` and the modules' own Makefiles under contrib/.
#
#   make deb     the Debian packages (packaging/debian) in dist/: the tree
#                is copied to dist/build/dthrottle-<version>, with
#                packaging/debian as its debian/, and built there with
#                dpkg-buildpackage (binaries only, unsigned). Needs Go on
#                PATH and: apt-get install dpkg-dev debhelper apache2-dev
#                nginx-dev liblua5.3-dev gcc make
#   make image   the container image localhost/dthrottle:latest in
#                podman's store (packaging/container/Containerfile): a
#                static dthrottled on no base image, nothing pulled.
#                Needs Go and podman
#   make clean   removes dist/
#
# docs/install.md says how each is installed and run.

VERSION := $(shell dpkg-parsechangelog -l packaging/debian/changelog -S Version 2>/dev/null)
UPSTREAM := $(firstword $(subst -, ,$(VERSION)))
DIST := dist
STAGE := $(DIST)/build/dthrottle-$(UPSTREAM)
IMAGE ?= localhost/dthrottle:latest
PODMAN ?= podman

deb:
	@command -v go >/dev/null || { echo "make deb: Go is not on PATH (go.dev/dl; go.mod names the version)" >&2; exit 1; }
	@test -n "$(VERSION)" || { echo "make deb: dpkg-parsechangelog is missing: apt-get install dpkg-dev" >&2; exit 1; }
	rm -rf $(DIST)/build
	mkdir -p $(STAGE)
	tar -c --exclude=./.git --exclude=./$(DIST) --exclude='*/build' \
		--exclude='*.so' --exclude='*.o' --exclude='*/.libs' . | tar -x -C $(STAGE)
	cp -R packaging/debian $(STAGE)/debian
	cd $(STAGE) && dpkg-buildpackage -b -us -uc
	mv $(DIST)/build/*.deb $(DIST)/
	rm -rf $(DIST)/build

image:
	@command -v go >/dev/null || { echo "make image: Go is not on PATH" >&2; exit 1; }
	rm -rf $(DIST)/image
	mkdir -p $(DIST)/image
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.version=$(UPSTREAM)" \
		-o $(DIST)/image/dthrottled ./cmd/dthrottled
	$(PODMAN) build --pull=never -t $(IMAGE) -f packaging/container/Containerfile $(DIST)/image
	rm -rf $(DIST)/image

clean:
	rm -rf $(DIST)

.PHONY: deb image clean
