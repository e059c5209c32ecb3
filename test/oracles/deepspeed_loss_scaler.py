"""DeepSpeed's fp16 dynamic loss scaling rule, reimplemented as the oracle
for dsopt's loss scaler (deepspeed/runtime/fp16/loss_scaler.py,
DynamicLossScaler.update_scale with scale_factor 2 and
raise_error_at_min_scale, and the fp16 config keys' defaults).

Used by runtime/tests/loss_scaler_check.py on random overflow sequences and
by the end-to-end fp16 checks, which feed it each step's overflow flag from
dsopt's log and compare the logged scale sequence."""


class AtMinimum(Exception):
    """DeepSpeed raises at an overflow with the scale at its minimum."""


class DeepSpeedLossScaler:
    def __init__(self, loss_scale=0, initial_scale_power=16, loss_scale_window=1000,
                 hysteresis=2, consecutive_hysteresis=False, min_loss_scale=1):
        self.dynamic = loss_scale == 0
        self.cur_scale = float(2 ** initial_scale_power) if self.dynamic else float(loss_scale)
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_window = loss_scale_window
        self.min_scale = min_loss_scale
        self.delayed_shift = hysteresis
        self.cur_hysteresis = hysteresis
        self.consecutive_hysteresis = consecutive_hysteresis

    def update_scale(self, overflow):
        if not self.dynamic:
            self.cur_iter += 1
            return
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if self.cur_scale == self.min_scale:
                    raise AtMinimum(self.cur_iter)
                self.cur_scale = max(self.cur_scale / 2, self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            if (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= 2
        self.cur_iter += 1


def scale_sequence(flags, **options):
    """The scale each step runs with, for a list of overflow flags; stops at
    the step where DeepSpeed would raise (returned as the second value, a
    0-based index, or None)."""
    scaler = DeepSpeedLossScaler(**options)
    scales = []
    for i, overflow in enumerate(flags):
        scales.append(scaler.cur_scale)
        try:
            scaler.update_scale(overflow)
        except AtMinimum:
            return scales, i
    return scales, None
