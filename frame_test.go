package gust

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A header that breaks the protocol fails the connection with 1002 and
// the codec's reason (internal/wsframe tests the codec itself).
func TestParseFrameHeaderIsAProtocolError(t *testing.T) {
	var h frameHeader
	n, err := parseFrameHeader([]byte{0x81, 0x05}, &h, true, false)
	require.Zero(t, n)
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, StatusProtocolError, pe.Code)
	require.Equal(t, "client frame not masked", pe.Reason)
	n, err = parseFrameHeader([]byte{0x81, 0x85, 1, 2, 3, 4}, &h, true, false)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, OpText, h.Op)
}
