#!/bin/bash
# `ray` in the rayscale sidecar image: KubeRay runs `ray kuberay-autoscaler --cluster-name N
# --cluster-namespace NS` in the autoscaler container (under `bash -lc`, so `rayscale`, which
# the wheel put in /usr/local/bin, is on PATH); this runs rayscale with those flags.
# Anything else is refused: this image has no Ray.
if [ "$1" = "kuberay-autoscaler" ]; then
  shift
  exec rayscale kuberay "$@"
fi
echo "this image runs rayscale only: 'ray $1' is not available (use 'ray kuberay-autoscaler ...')" >&2
exit 2
