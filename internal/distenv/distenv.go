// Package distenv builds the environment MLX's distributed backends read,
// for processes that one parent starts on this machine: the ring backend's
// hostfile of free loopback ports (CPU), and NCCL's rank, world size and
// rendezvous address with one GPU per process (CUDA).
package distenv

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreeLoopbackPorts returns n distinct TCP ports on 127.0.0.1 that were
// free a moment ago: each is bound and released. Another process may take
// one in between; the ranks then fail to connect and the caller reports it.
func FreeLoopbackPorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// WriteRingHostfile writes the ring backend's hostfile for one rank per
// address ("host:port"): a JSON list whose entry r lists rank r's
// addresses, the format of MLX_HOSTFILE and of mlx.launch's hostfiles.
func WriteRingHostfile(path string, addrs []string) error {
	hosts := make([][]string, len(addrs))
	for i, a := range addrs {
		hosts[i] = []string{a}
	}
	b, err := json.Marshal(hosts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing the ring hostfile: %w", err)
	}
	return nil
}

// LoopbackRing writes a hostfile for n ranks on free loopback ports into
// path and returns it.
func LoopbackRing(path string, n int) error {
	ports, err := FreeLoopbackPorts(n)
	if err != nil {
		return err
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return WriteRingHostfile(path, addrs)
}

// Ring is the environment of rank r of a ring over hostfile.
func Ring(rank int, hostfile string) []string {
	return []string{"MLX_RANK=" + strconv.Itoa(rank), "MLX_HOSTFILE=" + hostfile}
}

// NCCL is the environment of rank r of size ranks that meet at ip:port,
// each on its own GPU: CUDA_VISIBLE_DEVICES makes the r-th GPU the
// process's only device (the r-th of the caller's CUDA_VISIBLE_DEVICES
// when that is set, so a parent limited to some GPUs hands out those).
// NVLink multicast (NVLS) stays off unless the caller's environment sets
// NCCL_NVLS_ENABLE.
func NCCL(rank, size int, ip string, port int) []string {
	gpu := strconv.Itoa(rank)
	if visible := strings.Split(os.Getenv("CUDA_VISIBLE_DEVICES"), ","); len(visible) > rank && visible[rank] != "" {
		gpu = strings.TrimSpace(visible[rank])
	}
	env := []string{"MLX_RANK=" + strconv.Itoa(rank), "MLX_WORLD_SIZE=" + strconv.Itoa(size),
		"NCCL_HOST_IP=" + ip, "NCCL_PORT=" + strconv.Itoa(port), "CUDA_VISIBLE_DEVICES=" + gpu}
	if _, set := os.LookupEnv("NCCL_NVLS_ENABLE"); !set {
		env = append(env, "NCCL_NVLS_ENABLE=0")
	}
	return env
}
