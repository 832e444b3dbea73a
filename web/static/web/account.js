// The account badge in the top bar: the user's tier and what is left of their token budget.

import { api } from "./api.js";

export class AccountBadge {
  constructor({ accountTier, accountBudget }) {
    this.tier = accountTier;
    this.budget = accountBudget;
  }

  async refresh() {
    try {
      const me = await api("GET", "/api/me");
      this.tier.textContent = `${me.tier} tier`;
      this.tier.hidden = false;
      if (me.remaining_tokens === null || me.remaining_tokens === undefined) {
        this.budget.hidden = true;
      } else {
        const left = Math.max(0, Math.floor(me.remaining_tokens)).toLocaleString();
        this.budget.textContent = `${left} tokens left`;
        const { bucket_capacity_tokens: capacity, bucket_refill_per_s: refill } = me.limits;
        this.budget.title = `Token budget: ${left} of ${capacity.toLocaleString()}, refilling ${refill} per second`;
        this.budget.hidden = false;
      }
    } catch {
      // Not essential: the header just stays without tier and budget.
    }
  }
}
