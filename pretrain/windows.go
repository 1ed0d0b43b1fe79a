package pretrain

import (
	"fmt"

	"github.com/posttrainllm/posttrainllm/train"
)

// DescribeWindows is train.WindowSource for a run's header: where its windows
// come from.
func DescribeWindows(cfg train.Config, n int) string {
	if device, why := train.WindowSource(cfg, n); !device {
		return "copied from the host (" + why + ")"
	}
	return fmt.Sprintf("gathered on the device from %d tokens held there", n)
}
