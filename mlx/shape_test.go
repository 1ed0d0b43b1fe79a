package mlx

import "testing"

// iota6 is [[0,1,2],[3,4,5]].
func iota6() *Array { return f32([]float64{0, 1, 2, 3, 4, 5}, 2, 3) }

func TestReshapeTranspose(t *testing.T) {
	onMLX(t, func() {
		a := iota6()
		checkClose(t, "reshape", Reshape(a, 3, 2), []int{3, 2}, []float64{0, 1, 2, 3, 4, 5}, 0)
		checkClose(t, "reshape -1", Reshape(a, -1), []int{6}, []float64{0, 1, 2, 3, 4, 5}, 0)
		if Reshape(a, 4, 2).Err() == nil {
			t.Fatal("reshape of 6 elements to [4,2] succeeded")
		}
		checkClose(t, "transpose", Transpose(a), []int{3, 2}, []float64{0, 3, 1, 4, 2, 5}, 0)
		// [2,3,1] permuted by (2,0,1) is [1,2,3].
		b := Reshape(a, 2, 3, 1)
		checkClose(t, "transpose axes", Transpose(b, 2, 0, 1), []int{1, 2, 3}, []float64{0, 1, 2, 3, 4, 5}, 0)
		checkClose(t, "transpose axes 1,0,2", Transpose(b, 1, 0, 2), []int{3, 2, 1}, []float64{0, 3, 1, 4, 2, 5}, 0)
		checkClose(t, "swapaxes", SwapAxes(a, 0, 1), []int{3, 2}, []float64{0, 3, 1, 4, 2, 5}, 0)
		checkClose(t, "swapaxes negative", SwapAxes(b, -1, 0), []int{1, 3, 2}, []float64{0, 3, 1, 4, 2, 5}, 0)
	})
}

func TestBroadcastExpandSqueezeFlatten(t *testing.T) {
	onMLX(t, func() {
		row := f32([]float64{1, 2, 3})
		checkClose(t, "broadcast_to", BroadcastTo(row, 2, 3), []int{2, 3}, []float64{1, 2, 3, 1, 2, 3}, 0)
		col := Reshape(f32([]float64{1, 2}), 2, 1)
		checkClose(t, "broadcast column", BroadcastTo(col, 2, 2), []int{2, 2}, []float64{1, 1, 2, 2}, 0)
		if BroadcastTo(row, 2, 2).Err() == nil {
			t.Fatal("broadcast of [3] to [2,2] succeeded")
		}
		checkShape(t, "expand_dims 0", ExpandDims(row, 0), 1, 3)
		checkShape(t, "expand_dims -1", ExpandDims(row, -1), 3, 1)
		checkClose(t, "expand_dims values", ExpandDims(row, 1), []int{3, 1}, []float64{1, 2, 3}, 0)
		checkClose(t, "squeeze", Squeeze(ExpandDims(row, 0), 0), []int{3}, []float64{1, 2, 3}, 0)
		if Squeeze(row, 0).Err() == nil {
			t.Fatal("squeeze of a size-3 axis succeeded")
		}
		c := Reshape(Arange(0, 24, 1, Float32), 2, 3, 4)
		checkShape(t, "flatten all", Flatten(c, 0, -1), 24)
		checkShape(t, "flatten 1..2", Flatten(c, 1, 2), 2, 12)
		f := Flatten(c, 0, 1)
		checkShape(t, "flatten 0..1", f, 6, 4)
		v := values(t, f)
		if v[4] != 4 || v[23] != 23 {
			t.Fatalf("flatten keeps row-major order, got %v", v)
		}
	})
}

func TestConcatenateStackSplit(t *testing.T) {
	onMLX(t, func() {
		a := iota6()
		b := f32([]float64{6, 7, 8}, 1, 3)
		checkClose(t, "concatenate axis0", Concatenate([]*Array{a, b}, 0), []int{3, 3}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8}, 0)
		checkClose(t, "concatenate axis1", Concatenate([]*Array{a, a}, 1), []int{2, 6},
			[]float64{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 0)
		if Concatenate([]*Array{a, b}, 1).Err() == nil {
			t.Fatal("concatenate of [2,3] and [1,3] along axis 1 succeeded")
		}
		x, y := f32([]float64{1, 2}), f32([]float64{3, 4})
		checkClose(t, "stack axis0", Stack([]*Array{x, y}, 0), []int{2, 2}, []float64{1, 2, 3, 4}, 0)
		checkClose(t, "stack axis1", Stack([]*Array{x, y}, 1), []int{2, 2}, []float64{1, 3, 2, 4}, 0)

		parts := Split(a, 3, 1)
		if len(parts) != 3 {
			t.Fatalf("split into 3 gave %d parts", len(parts))
		}
		for i, p := range parts {
			checkClose(t, "split part", p, []int{2, 1}, []float64{float64(i), float64(i + 3)}, 0)
		}
		bad := Split(a, 4, 1)
		if len(bad) != 4 || bad[0].Err() == nil {
			t.Fatalf("split of 3 columns into 4 must give 4 arrays carrying an error, got %v", bad)
		}
		at := SplitAt(Arange(0, 6, 1, Float32), []int{1, 4}, 0)
		if len(at) != 3 {
			t.Fatalf("split at 2 indices gave %d parts", len(at))
		}
		checkClose(t, "split_at 0", at[0], []int{1}, []float64{0}, 0)
		checkClose(t, "split_at 1", at[1], []int{3}, []float64{1, 2, 3}, 0)
		checkClose(t, "split_at 2", at[2], []int{2}, []float64{4, 5}, 0)
	})
}

func TestSlices(t *testing.T) {
	onMLX(t, func() {
		a := Reshape(Arange(0, 12, 1, Float32), 3, 4)
		checkClose(t, "slice", Slice(a, []int{1, 1}, []int{3, 3}), []int{2, 2}, []float64{5, 6, 9, 10}, 0)
		checkClose(t, "slice strided", SliceStrided(a, []int{0, 0}, []int{3, 4}, []int{2, 3}), []int{2, 2},
			[]float64{0, 3, 8, 11}, 0)
		checkClose(t, "slice reversed", SliceStrided(a, []int{0, 3}, []int{1, -5}, []int{1, -1}), []int{1, 4},
			[]float64{3, 2, 1, 0}, 0)
		if SliceStrided(a, []int{0}, []int{1, 2}, []int{1}).Err() == nil {
			t.Fatal("slice with mismatched start/stop lengths succeeded")
		}
		upd := f32([]float64{-1, -2, -3, -4}, 2, 2)
		got := SliceUpdate(a, upd, []int{0, 2}, []int{2, 4})
		checkClose(t, "slice_update", got, []int{3, 4},
			[]float64{0, 1, -1, -2, 4, 5, -3, -4, 8, 9, 10, 11}, 0)
		// The source is unchanged: arrays are immutable.
		checkClose(t, "slice_update source", a, []int{3, 4}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0)
		if SliceUpdate(a, upd, []int{0, 0}, []int{3, 3}).Err() == nil {
			t.Fatal("slice_update of a [2,2] update into a [3,3] window succeeded")
		}
	})
}

func TestGather(t *testing.T) {
	onMLX(t, func() {
		a := Reshape(Arange(0, 12, 1, Float32), 3, 4)
		idx := FromSlice([]int32{2, 0})
		checkClose(t, "take axis0", Take(a, idx, 0), []int{2, 4}, []float64{8, 9, 10, 11, 0, 1, 2, 3}, 0)
		checkClose(t, "take axis1", Take(a, idx, 1), []int{3, 2}, []float64{2, 0, 6, 4, 10, 8}, 0)
		// Embedding lookup: [2,2] token ids into a [3,4] table give [2,2,4].
		tok := FromSlice([]int32{1, 1, 0, 2}, 2, 2)
		emb := Take(a, tok, 0)
		checkShape(t, "embedding", emb, 2, 2, 4)
		if v := values(t, emb); v[0] != 4 || v[15] != 11 {
			t.Fatalf("embedding lookup = %v", v)
		}
		along := FromSlice([]int32{3, 0, 1}, 3, 1)
		checkClose(t, "take_along_axis", TakeAlongAxis(a, along, 1), []int{3, 1}, []float64{3, 4, 9}, 0)
		put := PutAlongAxis(a, along, f32([]float64{-1, -2, -3}, 3, 1), 1)
		checkClose(t, "put_along_axis", put, []int{3, 4},
			[]float64{0, 1, 2, -1, -2, 5, 6, 7, 8, -3, 10, 11}, 0)
		// A scalar value broadcasts to every index.
		put0 := PutAlongAxis(a, along, f32([]float64{100}, 1, 1), 1)
		checkClose(t, "put_along_axis broadcast", put0, []int{3, 4},
			[]float64{0, 1, 2, 100, 100, 5, 6, 7, 8, 100, 10, 11}, 0)
	})
}

// A transpose is a view of its input's buffer in column order; a matmul,
// a reshape of rows and a copy (Contiguous) write rows.
func TestRowContiguous(t *testing.T) {
	onMLX(t, func() {
		a := iota6()
		for _, c := range []struct {
			name string
			a    *Array
			want bool
		}{
			{"array", a, true},
			{"transpose", Transpose(a), false},
			{"reshape", Reshape(a, 3, 2), true},
			{"matmul", Matmul(a, Transpose(a)), true},
			{"transpose of a column", Transpose(Reshape(a, 6, 1)), true},
		} {
			got, err := c.a.RowContiguous()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("%s: row contiguous %t, want %t", c.name, got, c.want)
			}
		}
		if _, err := Reshape(a, 4, 2).RowContiguous(); err == nil {
			t.Fatal("row_contiguous of a failed reshape succeeded")
		}
	})
}
