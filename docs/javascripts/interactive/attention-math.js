// Attention in plain JavaScript on arrays of rows, in float64 like the Python reference snippets.
// `attention` is the textbook version (whole score matrix, row softmax); `tiledAttention` is the
// FlashAttention forward pass (key blocks streamed through an online softmax) and returns every
// intermediate value, in the same schema as snippets/flashattention/worked_example.py's trace.json.

export function dot(a, b) {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

// scale · Q Kᵀ, with −∞ above the diagonal when causal (query i may only see keys j ≤ i).
export function scores(Q, K, { scale = 1, causal = false } = {}) {
  return Q.map((q, i) => K.map((k, j) => (causal && j > i ? -Infinity : scale * dot(q, k))));
}

// Softmax of each row, subtracting the row maximum first so exp never overflows.
export function softmaxRows(S) {
  return S.map((row) => {
    const m = Math.max(...row);
    const e = row.map((s) => Math.exp(s - m));
    const total = e.reduce((a, b) => a + b, 0);
    return e.map((x) => x / total);
  });
}

export function matmul(A, B) {
  return A.map((row) => B[0].map((_, j) => row.reduce((s, a, k) => s + a * B[k][j], 0)));
}

export function attention(Q, K, V, options = {}) {
  const S = scores(Q, K, options);
  const P = softmaxRows(S);
  return { S, P, O: matmul(P, V) };
}

function blocks(n, block) {
  const out = [];
  for (let start = 0; start < n; start += block) {
    out.push(Array.from({ length: Math.min(block, n - start) }, (_, i) => start + i));
  }
  return out;
}

// FlashAttention's forward pass. Each worker owns one block of query rows and keeps, per row, a running
// maximum m, a running denominator l and an unnormalised output O; for every key block it
//   S = scale · Q_i K_jᵀ,  m_new = max(m_old, rowmax S),  α = exp(m_old − m_new),  P = exp(S − m_new),
//   l = α·l + rowsum P,    O = α·O + P V_j
// and at the end returns O / l. Under a causal mask a worker skips key blocks that lie wholly in its future.
export function tiledAttention(Q, K, V, { scale, block, causal = false }) {
  const dv = V[0].length;
  const keyBlocks = blocks(K.length, block);
  const workers = blocks(Q.length, block).map((rows) => {
    let m = rows.map(() => -Infinity);
    let l = rows.map(() => 0);
    let O = rows.map(() => new Array(dv).fill(0));
    const steps = [];
    keyBlocks.forEach((keys, kBlock) => {
      if (causal && keys[0] > rows[rows.length - 1]) return;
      const S = rows.map((r) => keys.map((c) => (causal && c > r ? -Infinity : scale * dot(Q[r], K[c]))));
      const mNew = S.map((row, i) => Math.max(m[i], ...row));
      const alpha = mNew.map((mn, i) => Math.exp(m[i] - mn));
      const P = S.map((row, i) => row.map((s) => Math.exp(s - mNew[i])));
      const lNew = P.map((row, i) => alpha[i] * l[i] + row.reduce((a, b) => a + b, 0));
      const ONew = P.map((row, i) =>
        O[i].map((o, j) => alpha[i] * o + row.reduce((acc, p, c) => acc + p * V[keys[c]][j], 0)));
      steps.push({ k_block: kBlock, S, m_old: m, m_new: mNew, alpha, P, l: lNew, O: ONew });
      m = mNew;
      l = lNew;
      O = ONew;
    });
    return { rows, steps, output: O.map((row, i) => row.map((o) => o / l[i])) };
  });
  return {
    Q, K, V, scale, block, causal,
    workers,
    output: workers.flatMap((w) => w.output),
  };
}

export function maxAbsDiff(A, B) {
  let worst = 0;
  A.forEach((row, i) => row.forEach((a, j) => { worst = Math.max(worst, Math.abs(a - B[i][j])); }));
  return worst;
}

// A small seeded generator (mulberry32) so a reader's "random" example can be reproduced from its seed.
export function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Standard-normal entries (Box–Muller), rounded to one decimal so they are easy to read and retype.
export function randomMatrix(rand, rows, cols) {
  return Array.from({ length: rows }, () => Array.from({ length: cols }, () => {
    const u = 1 - rand();
    const v = rand();
    const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    return Math.round(z * 10) / 10;
  }));
}
