"""Online softmax: one pass over the scores, keeping only a running max m and a running
sum l."""

import math

scores = [1.0, 3.0, 0.5, 4.0, 2.0]

# Two passes, as usually written: find the max, then sum the exponentials.
m = max(scores)
two_pass = [math.exp(s - m) / sum(math.exp(t - m) for t in scores) for s in scores]

# One pass: whenever a larger score arrives, rescale what was summed so far by
# exp(m_old - m_new).
m, l = -math.inf, 0.0
print(f"{'score':>6} {'m':>6} {'alpha':>8} {'l':>9}")
for s in scores:
    m_new = max(m, s)
    alpha = math.exp(m - m_new)  # 0.0 for the first score, since m starts at -inf
    l = alpha * l + math.exp(s - m_new)
    m = m_new
    print(f"{s:6.1f} {m:6.1f} {alpha:8.4f} {l:9.5f}")

one_pass = [math.exp(s - m) / l for s in scores]
print("softmax, two passes:", [round(p, 6) for p in two_pass])
print("softmax, one pass:  ", [round(p, 6) for p in one_pass])
# They agree to rounding error: the one-pass sum is rescaled by factors that are
# themselves rounded, which can move the last few bits, so compare with a tolerance.
close = all(abs(a - b) < 1e-12 for a, b in zip(one_pass, two_pass))
print("equal to 12 decimals:", close)
