"""The words the catalog generator draws from: product types, option values, brands and the colour list.

Everything here is data. The product types follow WebShop's five categories (beauty, food, fashion, furniture,
electronics); each type carries the search query its products share, its Amazon-style category path, a pool of
attributes, its option groups and a price range. Product texts are built without digits and without option values,
so that WebShop's fallback rule (an option value found in the title, features or description counts as matched) only
fires where the generator means it to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# WebShop's colour normalisation list (web_agent_site/engine/normalize.py): an option value is replaced by the first
# of these words it contains, in this order, before options are compared.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)  # fmt: skip

CATEGORY_ROOTS = {
    "beauty": "Beauty & Personal Care",
    "food": "Grocery & Gourmet Food",
    "fashion": "Clothing, Shoes & Jewelry",
    "furniture": "Home & Kitchen",
    "electronics": "Electronics",
}

# Invented brand names (proper nouns), drawn per product.
BRANDS = (
    "Aurelo", "Belvane", "Brisko", "Calmora", "Cindero", "Dovella", "Elmscott", "Fennick", "Galvani", "Harlowe",
    "Ivandel", "Jorvik", "Kestrel", "Lumira", "Marlowe", "Norvella", "Orvane", "Pellora", "Quillon", "Rosano",
    "Sallowe", "Tamsin", "Umbria", "Valtrue", "Wrenly", "Xandor", "Yarrow", "Zephra", "Amberly", "Bexley",
    "Corvina", "Delmont", "Everwell", "Fairlund", "Glenmoor", "Hollis", "Istra", "Juneau", "Kinsley", "Lockwell",
    "Merriday", "Nobleton", "Oakhurst", "Pembry", "Quenby", "Redmere", "Stellan", "Tidewell", "Uplands", "Verdant",
    "Westbrook", "Yorkleigh", "Zennor", "Ashgrove", "Birchwell", "Caspian", "Driftwood", "Emberly", "Foxmoor",
    "Greyhaven", "Hearthly", "Ironvale", "Juniperra", "Kelvane", "Larkspur", "Moorland", "Northwind", "Orchardly",
    "Pinecrest", "Quarryton", "Riverly", "Summitra", "Thistle", "Underhill", "Vireo", "Willowby", "Yewdale",
    "Zentra", "Alderly", "Bramwell",
)  # fmt: skip

# Words of titles that are not nouns. WebShop's type reward compares the nouns and proper nouns of two titles (spaCy
# part-of-speech tags); this package reads every other word of a title as a noun.
NON_NOUNS = frozenset(
    """
    a an and the for with of to in on by at as or from into no non not up under anti
    free long lasting sensitive natural dry treated hyaluronic fine greasy matte highly pigmented vegan hydrating
    quick toxic high resistant ionic fast lightweight low friendly cool moisturizing synthetic easy clean soft wooden
    dark medium fair organic single whole based individually wrapped kosher certified loose resealable artificial
    cold pressed first added fed breathable open adjustable washable short relaxed wicking proof four lined
    waterproof packable windproof elastic flowy floral cushioned reinforced lumbar ergonomic heavy padded solid mid
    engineered industrial needed rounded faux hidden double sided cancelling built shockproof wireless compatible
    slim raised clear military braided durable compact dual approved outdoor deep silent rechargeable absorbing
    extra portable smart gummy virgin ground green
    """.split()
)


@dataclass(frozen=True)
class ProductType:
    """One kind of product: every product of a type shares its query, category path and option groups.

    Attributes:
        category: One of WebShop's categories (``beauty``, ``food``, ``fashion``, ``furniture``, ``electronics``).
        query: The search query the type's products were "scraped" with (WebShop's ``query`` field).
        path: The category path below the category root, as in WebShop's ``product_category``.
        name: The noun phrase naming the product in titles and instructions, in lower case.
        attributes: The pool of attribute phrases its products draw from.
        options: Option groups (name to pool of values) its products draw from.
        price: ``(low, high)`` range of prices in dollars.
        audiences: Title suffixes naming who the product is for (``"for Men"``); one is drawn per product.
        blurbs: Type-specific sentences for descriptions and feature bullets (no digits, no option values).
    """

    category: str
    query: str
    path: tuple[str, ...]
    name: str
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]]
    price: tuple[float, float]
    audiences: tuple[str, ...] = ("",)
    blurbs: tuple[str, ...] = field(default=())

    @property
    def product_category(self) -> str:
        """The full category path joined with WebShop's separator."""
        return " › ".join((CATEGORY_ROOTS[self.category], *self.path))


COLORS = (
    "black", "white", "navy blue", "grey", "red", "green", "beige", "brown", "pink", "purple", "yellow", "orange",
    "teal", "burgundy", "khaki", "olive", "silver", "gold", "charcoal", "ivory", "coral", "lavender", "turquoise",
    "maroon", "mint", "taupe", "sky blue", "wine", "mustard", "camel",
)  # fmt: skip
WOOD_COLORS = (
    "walnut", "espresso", "white", "black", "grey", "natural", "rustic brown", "oak", "cherry", "driftwood", "teak",
    "mahogany", "cream",
)  # fmt: skip
LIP_COLORS = (
    "ruby red", "nude", "berry", "coral", "mauve", "plum", "pink", "brick", "wine", "peach", "fuchsia", "cherry",
    "caramel", "rose", "merlot",
)  # fmt: skip
CLOTHING_SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large")
SHOE_SIZES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
BED_SIZES = ("twin", "full", "queen", "king", "california king")
SCENTS = (
    "bright citrus", "lavender", "unscented", "coconut", "eucalyptus", "vanilla", "sandalwood", "cucumber melon",
    "ocean breeze", "cedarwood", "jasmine", "fresh linen", "green tea", "rose", "peppermint", "honey almond",
)  # fmt: skip
BEAUTY_SIZES = (
    "1.7 fl oz (pack of 1)", "3.4 fl oz (pack of 1)", "8 fl oz (pack of 1)", "12 fl oz (pack of 1)",
    "16 fl oz (pack of 1)", "8 fl oz (pack of 2)", "12 fl oz (pack of 3)", "2.6 ounce (pack of 1)",
    "2.6 ounce (pack of 2)", "2.6 ounce (pack of 3)",
)  # fmt: skip
FOOD_SIZES = (
    "12 ounce (pack of 1)", "12 ounce (pack of 2)", "12 ounce (pack of 6)", "1 pound (pack of 1)",
    "2 pound (pack of 1)", "8 ounce (pack of 4)", "16 ounce (pack of 1)", "24 ounce (pack of 1)",
    "5 ounce (pack of 3)", "3 ounce (pack of 12)",
)  # fmt: skip
COUNT_SIZES = ("6 count", "12 count", "15 count", "18 count", "24 count", "30 count", "36 count", "48 count")
COFFEE_FLAVORS = (
    "french roast", "hazelnut", "vanilla", "colombian", "breakfast blend", "caramel", "mocha", "italian roast",
    "house blend", "decaf", "pumpkin spice", "cinnamon",
)  # fmt: skip
TEA_FLAVORS = (
    "jasmine", "lemon ginger", "mint", "peach", "honey", "pomegranate", "matcha", "original", "blueberry",
    "mango", "chai", "orange blossom",
)  # fmt: skip
SNACK_FLAVORS = (
    "peanut butter", "chocolate chip", "cookies and cream", "salted caramel", "birthday cake", "almond",
    "blueberry", "lemon", "coconut", "cinnamon roll", "strawberry", "banana", "apple pie", "double chocolate",
)  # fmt: skip
CANDY_FLAVORS = (
    "strawberry", "sour apple", "cherry", "watermelon", "blue raspberry", "tropical fruit", "peach rings",
    "lemon", "grape", "mixed fruit", "orange", "pineapple",
)  # fmt: skip
SAUCE_FLAVORS = (
    "marinara", "tomato basil", "garlic", "arrabbiata", "alfredo", "roasted pepper", "vodka", "mushroom",
    "puttanesca", "four cheese", "pesto",
)  # fmt: skip
JERKY_FLAVORS = (
    "original", "teriyaki", "peppered", "sweet and spicy", "hickory smoked", "chipotle", "honey bbq",
    "jalapeno", "sriracha", "garlic pepper",
)  # fmt: skip
NUT_FLAVORS = (
    "classic", "tropical", "cranberry", "honey roasted", "dark chocolate", "sea salt", "maple", "cherry",
    "mountain blend", "cashew",
)  # fmt: skip
PHONE_MODELS = (
    "iphone 13", "iphone 14", "iphone 14 pro", "iphone 15", "iphone 15 pro max", "galaxy s23", "galaxy s24",
    "pixel 8", "pixel 8 pro",
)  # fmt: skip

WOMEN, MEN, UNISEX = ("for Women",), ("for Men",), ("", "for Men", "for Women")

PRODUCT_TYPES = (
    # ---------------------------------------------------------------- beauty
    ProductType(
        "beauty", "deodorant", ("Personal Care", "Deodorants & Antiperspirants", "Deodorant"), "deodorant",
        ("aluminum free", "long lasting", "sensitive skin", "natural ingredients", "cruelty free", "paraben free",
         "baking soda free", "travel size"),
        {"scent": SCENTS, "size": BEAUTY_SIZES}, (5.0, 24.0), UNISEX,
        ("Keeps you feeling fresh from morning to night.", "Glides on smoothly and dries quickly."),
    ),
    ProductType(
        "beauty", "shampoo", ("Hair Care", "Shampoo & Conditioner", "Shampoos"), "shampoo",
        ("sulfate free", "dry hair", "hair growth", "tea tree", "argan oil", "color treated", "paraben free",
         "natural ingredients"),
        {"scent": SCENTS, "size": BEAUTY_SIZES}, (6.0, 32.0), ("",),
        ("Cleanses gently while leaving hair soft and shiny.", "A rich lather that rinses out easily."),
    ),
    ProductType(
        "beauty", "face moisturizer", ("Skin Care", "Face", "Moisturizers"), "face moisturizer",
        ("hyaluronic acid", "fine lines", "dry skin", "oil free", "fragrance free", "anti aging", "vitamin e",
         "non greasy"),
        {"size": BEAUTY_SIZES}, (9.0, 48.0), UNISEX,
        ("Absorbs quickly for a smooth, healthy glow.", "Dermatologist tested for daily use."),
    ),
    ProductType(
        "beauty", "lipstick", ("Makeup", "Lips", "Lipstick"), "lipstick",
        ("long lasting", "cruelty free", "matte finish", "highly pigmented", "vegan", "paraben free",
         "hydrating formula", "shea butter"),
        {"color": LIP_COLORS}, (5.0, 28.0), ("",),
        ("Rich color in a single swipe.", "A creamy formula that never feels heavy."),
    ),
    ProductType(
        "beauty", "nail polish", ("Foot, Hand & Nail Care", "Nail Art & Polish", "Nail Polish"), "nail polish",
        ("quick drying", "long lasting", "non toxic", "high gloss", "chip resistant", "vegan", "cruelty free"),
        {"color": COLORS}, (4.0, 18.0), ("",),
        ("A smooth brush gives even coverage.", "Salon quality shine at home."),
    ),
    ProductType(
        "beauty", "hair dryer", ("Hair Care", "Styling Tools & Appliances", "Hair Dryers"), "hair dryer",
        ("ionic technology", "fast drying", "lightweight", "low noise", "travel friendly", "concentrator nozzle",
         "cool shot button"),
        {"color": COLORS}, (19.0, 89.0), ("",),
        ("Powerful airflow cuts drying time.", "Comfortable grip for easy styling."),
    ),
    ProductType(
        "beauty", "body wash", ("Skin Care", "Body", "Body Washes"), "body wash",
        ("dry skin", "natural ingredients", "sulfate free", "shea butter", "coconut oil", "fragrance free",
         "moisturizing formula", "sensitive skin"),
        {"scent": SCENTS, "size": BEAUTY_SIZES}, (5.0, 26.0), UNISEX,
        ("Leaves skin clean, soft and refreshed.", "A creamy lather for the whole family."),
    ),
    ProductType(
        "beauty", "makeup brush set", ("Tools & Accessories", "Makeup Brushes & Tools", "Brush Sets"),
        "makeup brush set",
        ("synthetic bristles", "cruelty free", "easy to clean", "travel case", "soft bristles", "foundation brush",
         "wooden handles"),
        {"color": COLORS}, (8.0, 39.0), ("",),
        ("Blends powders and creams without streaks.", "Every brush keeps its shape wash after wash."),
    ),
    # ---------------------------------------------------------------- food
    ProductType(
        "food", "ground coffee", ("Beverages", "Coffee, Tea & Cocoa", "Coffee", "Ground Coffee"), "ground coffee",
        ("dark roast", "medium roast", "fair trade", "organic", "single origin", "low acid", "non gmo",
         "whole bean"),
        {"flavor name": COFFEE_FLAVORS, "size": FOOD_SIZES}, (7.0, 36.0), ("",),
        ("Roasted in small batches for a smooth cup.", "Brews well in drip machines and french presses."),
    ),
    ProductType(
        "food", "protein bars", ("Snack Foods", "Bars", "Protein Bars"), "protein bars",
        ("gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "plant based", "soy free",
         "dairy free"),
        {"flavor name": SNACK_FLAVORS, "size": COUNT_SIZES}, (12.0, 42.0), ("",),
        ("A satisfying snack before or after a workout.", "Soft and chewy with real ingredients."),
    ),
    ProductType(
        "food", "green tea", ("Beverages", "Coffee, Tea & Cocoa", "Tea", "Green Tea"), "green tea bags",
        ("organic", "caffeine free", "individually wrapped", "non gmo", "kosher certified", "sugar free",
         "loose leaf"),
        {"flavor name": TEA_FLAVORS, "size": COUNT_SIZES}, (4.0, 24.0), ("",),
        ("Steeps a bright, refreshing cup in minutes.", "Enjoy it hot or iced."),
    ),
    ProductType(
        "food", "trail mix", ("Snack Foods", "Nuts & Seeds", "Trail Mix"), "trail mix",
        ("gluten free", "resealable bag", "non gmo", "high protein", "no artificial flavors", "vegan",
         "kosher certified"),
        {"flavor name": NUT_FLAVORS, "size": FOOD_SIZES}, (6.0, 29.0), ("",),
        ("A crunchy mix of nuts, seeds and fruit.", "Perfect for hiking, school lunches and road trips."),
    ),
    ProductType(
        "food", "olive oil", ("Pantry Staples", "Cooking & Baking", "Oils", "Olive Oil"), "extra virgin olive oil",
        ("cold pressed", "organic", "non gmo", "glass bottle", "kosher certified", "first harvest",
         "single origin"),
        {"size": FOOD_SIZES}, (8.0, 45.0), ("",),
        ("Fruity aroma with a peppery finish.", "Great for salads, dipping and cooking."),
    ),
    ProductType(
        "food", "gummy candy", ("Snack Foods", "Candy & Chocolate", "Gummy Candy"), "gummy candy",
        ("gluten free", "fat free", "individually wrapped", "natural flavors", "vegan", "no artificial colors",
         "kosher certified"),
        {"flavor name": CANDY_FLAVORS, "size": FOOD_SIZES}, (4.0, 22.0), ("",),
        ("Soft, chewy and bursting with fruit flavor.", "A sweet treat for parties and movie nights."),
    ),
    ProductType(
        "food", "pasta sauce", ("Pantry Staples", "Sauces, Gravies & Marinades", "Pasta Sauces"), "pasta sauce",
        ("no sugar added", "low sodium", "keto friendly", "organic", "gluten free", "non gmo", "glass jar"),
        {"flavor name": SAUCE_FLAVORS, "size": FOOD_SIZES}, (5.0, 30.0), ("",),
        ("Slow simmered with ripe tomatoes and herbs.", "Ready to heat and serve."),
    ),
    ProductType(
        "food", "beef jerky", ("Meat & Seafood", "Jerky & Dried Meats", "Beef Jerky"), "beef jerky",
        ("high protein", "low fat", "gluten free", "grass fed", "low sugar", "resealable bag", "keto friendly"),
        {"flavor name": JERKY_FLAVORS, "size": FOOD_SIZES}, (7.0, 38.0), ("",),
        ("Tender strips marinated and smoked for hours.", "A savory snack that travels anywhere."),
    ),
    # ---------------------------------------------------------------- fashion
    ProductType(
        "fashion", "men's running shoes", ("Men", "Shoes", "Athletic", "Running", "Road Running"), "running shoes",
        ("non slip", "lightweight", "breathable mesh", "rubber sole", "arch support", "memory foam",
         "lace up closure"),
        {"color": COLORS, "size": SHOE_SIZES}, (25.0, 120.0), MEN,
        ("Responsive cushioning for long runs.", "A secure fit that moves with your foot."),
    ),
    ProductType(
        "fashion", "women's sandals", ("Women", "Shoes", "Sandals", "Flat Sandals"), "sandals",
        ("arch support", "non slip", "ankle strap", "open toe", "rubber sole", "memory foam", "adjustable buckle"),
        {"color": COLORS, "size": SHOE_SIZES}, (15.0, 70.0), WOMEN,
        ("Comfortable enough to wear all summer.", "Pairs well with dresses, shorts and jeans."),
    ),
    ProductType(
        "fashion", "men's t-shirts", ("Men", "Clothing", "Shirts", "T-Shirts"), "t-shirt",
        ("machine washable", "short sleeve", "cotton blend", "relaxed fit", "crew neck", "moisture wicking",
         "tagless collar"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (8.0, 35.0), MEN,
        ("Soft fabric that keeps its shape.", "An everyday essential for layering or on its own."),
    ),
    ProductType(
        "fashion", "women's yoga leggings", ("Women", "Clothing", "Active", "Leggings"), "yoga leggings",
        ("high waist", "tummy control", "moisture wicking", "side pockets", "squat proof", "four way stretch",
         "machine washable"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (14.0, 48.0), WOMEN,
        ("Buttery soft fabric that stays put.", "Made for yoga, running and lounging."),
    ),
    ProductType(
        "fashion", "pullover hoodie", ("Men", "Clothing", "Fashion Hoodies & Sweatshirts"), "pullover hoodie",
        ("fleece lined", "kangaroo pocket", "drawstring hood", "machine washable", "long sleeve", "relaxed fit",
         "cotton blend"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (18.0, 60.0), UNISEX,
        ("Warm and cozy for chilly days.", "Ribbed cuffs and hem hold in the warmth."),
    ),
    ProductType(
        "fashion", "rain jacket", ("Women", "Clothing", "Coats, Jackets & Vests", "Rain Jackets"), "rain jacket",
        ("waterproof", "packable hood", "zipper closure", "windproof", "lightweight", "breathable", "adjustable cuffs"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (29.0, 110.0), UNISEX,
        ("Keeps you dry when the weather turns.", "Folds into its own pocket for travel."),
    ),
    ProductType(
        "fashion", "women's maxi dress", ("Women", "Clothing", "Dresses", "Casual"), "maxi dress",
        ("short sleeve", "v neck", "side pockets", "elastic waist", "flowy fabric", "machine washable",
         "floral print"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (19.0, 65.0), WOMEN,
        ("Flowy and flattering for any occasion.", "Dress it up or down with ease."),
    ),
    ProductType(
        "fashion", "crew socks", ("Men", "Clothing", "Socks", "Athletic Socks"), "crew socks",
        ("moisture wicking", "cushioned sole", "arch compression", "breathable", "reinforced heel",
         "machine washable"),
        {"color": COLORS, "size": CLOTHING_SIZES}, (9.0, 30.0), UNISEX,
        ("Stays comfortable all day long.", "Holds up wash after wash."),
    ),
    # ---------------------------------------------------------------- furniture
    ProductType(
        "furniture", "office chair", ("Furniture", "Home Office Furniture", "Home Office Chairs", "Desk Chairs"),
        "office chair",
        ("lumbar support", "adjustable height", "easy assembly", "high back", "ergonomic design", "mesh back",
         "heavy duty", "padded armrests"),
        {"color": COLORS}, (49.0, 260.0), ("",),
        ("Supports good posture through long work days.", "Rolls smoothly on carpet and hard floors."),
    ),
    ProductType(
        "furniture", "coffee table", ("Furniture", "Living Room Furniture", "Tables", "Coffee Tables"),
        "coffee table",
        ("solid wood", "easy assembly", "storage shelf", "mid century", "space saving", "engineered wood",
         "metal frame"),
        {"color": WOOD_COLORS}, (45.0, 240.0), ("",),
        ("A sturdy centerpiece for your living room.", "Wipes clean in seconds."),
    ),
    ProductType(
        "furniture", "bookshelf", ("Furniture", "Living Room Furniture", "Bookcases"), "bookshelf",
        ("easy assembly", "space saving", "anti tip hardware", "engineered wood", "metal frame", "open shelves",
         "industrial style"),
        {"color": WOOD_COLORS}, (35.0, 190.0), ("",),
        ("Displays books, plants and photos with style.", "Sturdy shelves hold plenty of weight."),
    ),
    ProductType(
        "furniture", "bed frame", ("Furniture", "Bedroom Furniture", "Beds, Frames & Bases", "Bed Frames"),
        "platform bed frame",
        ("metal frame", "under bed storage", "noise free", "no box spring needed", "easy assembly", "heavy duty",
         "wooden slats"),
        {"size": BED_SIZES, "color": WOOD_COLORS}, (89.0, 420.0), ("",),
        ("Strong support for a restful night.", "Assembles with the tools included."),
    ),
    ProductType(
        "furniture", "nightstand", ("Furniture", "Bedroom Furniture", "Nightstands"), "nightstand",
        ("storage drawer", "easy assembly", "charging station", "solid wood", "space saving", "open shelf",
         "rounded corners"),
        {"color": WOOD_COLORS}, (29.0, 150.0), ("",),
        ("Keeps bedside essentials within reach.", "Compact enough for small bedrooms."),
    ),
    ProductType(
        "furniture", "bar stools", ("Furniture", "Kitchen & Dining Room Furniture", "Bar Stools"), "bar stools",
        ("swivel seat", "adjustable height", "faux leather", "footrest", "easy assembly", "padded seat",
         "heavy duty"),
        {"color": COLORS}, (59.0, 230.0), ("",),
        ("A comfortable seat for the kitchen island.", "Wipes clean after every meal."),
    ),
    ProductType(
        "furniture", "area rug", ("Home Décor Products", "Area Rugs, Runners & Pads", "Area Rugs"), "area rug",
        ("non slip backing", "machine washable", "easy to clean", "low pile", "stain resistant", "living room",
         "pet friendly"),
        {"color": COLORS, "size": ("2 x 3 feet", "4 x 6 feet", "5 x 7 feet", "6 x 9 feet", "8 x 10 feet")},
        (25.0, 210.0), ("",),
        ("Adds warmth and texture to any room.", "Soft underfoot and easy to vacuum."),
    ),
    ProductType(
        "furniture", "throw pillow covers", ("Bedding", "Decorative Pillows, Inserts & Covers", "Throw Pillow Covers"),
        "throw pillow covers",
        ("hidden zipper", "machine washable", "velvet fabric", "double sided", "living room", "farmhouse style"),
        {"color": COLORS, "size": ("16 x 16 inch", "18 x 18 inch", "20 x 20 inch", "22 x 22 inch")},
        (8.0, 32.0), ("",),
        ("Refreshes a sofa or bed in minutes.", "Soft to the touch and easy to care for."),
    ),
    # ---------------------------------------------------------------- electronics
    ProductType(
        "electronics", "wireless earbuds",
        ("Headphones, Earbuds & Accessories", "Headphones & Earbuds", "Earbud Headphones"), "wireless earbuds",
        ("noise cancelling", "bluetooth", "long battery life", "water resistant", "charging case",
         "built in microphone", "fast charging"),
        {"color": COLORS}, (19.0, 160.0), ("",),
        ("Clear sound with deep bass.", "Pairs instantly with phones and tablets."),
    ),
    ProductType(
        "electronics", "phone case", ("Cell Phones & Accessories", "Cases, Holsters & Sleeves", "Basic Cases"),
        "phone case",
        ("shockproof", "wireless charging compatible", "slim fit", "raised edges", "scratch resistant",
         "clear back", "military grade"),
        {"color": COLORS, "style": PHONE_MODELS}, (7.0, 35.0), ("",),
        ("Protects against drops and bumps.", "Precise cutouts for buttons and ports."),
    ),
    ProductType(
        "electronics", "usb c cable", ("Computers & Accessories", "Cables & Accessories", "USB Cables"),
        "usb c charging cable",
        ("fast charging", "braided nylon", "data sync", "durable", "aluminum connectors", "tangle free"),
        {"color": COLORS, "size": ("3 feet", "6 feet", "10 feet", "1 feet (pack of 2)", "6 feet (pack of 3)")},
        (6.0, 25.0), ("",),
        ("Charges phones, tablets and laptops.", "Bends thousands of times without fraying."),
    ),
    ProductType(
        "electronics", "power bank", ("Cell Phones & Accessories", "Chargers & Power Adapters", "Power Banks"),
        "portable power bank",
        ("fast charging", "usb c", "led display", "compact design", "dual output", "airline approved"),
        {"color": COLORS, "capacity": ("5000mah", "10000mah", "20000mah", "26800mah", "30000mah")},
        (15.0, 70.0), ("",),
        ("Charges your phone several times over.", "Slips easily into a bag or pocket."),
    ),
    ProductType(
        "electronics", "bluetooth speaker",
        ("Portable Audio & Video", "Portable Speakers & Docks", "Portable Bluetooth Speakers"), "bluetooth speaker",
        ("waterproof", "stereo sound", "long battery life", "built in microphone", "outdoor use", "deep bass",
         "hands free calling"),
        {"color": COLORS}, (19.0, 150.0), ("",),
        ("Big sound from a small speaker.", "Take the music from the kitchen to the beach."),
    ),
    ProductType(
        "electronics", "wireless mouse",
        ("Computers & Accessories", "Computer Accessories & Peripherals", "Keyboards, Mice & Accessories", "Mice"),
        "wireless mouse",
        ("ergonomic design", "silent click", "usb receiver", "rechargeable battery", "adjustable dpi",
         "plug and play"),
        {"color": COLORS}, (9.0, 60.0), ("",),
        ("Smooth tracking on most surfaces.", "Fits comfortably in either hand."),
    ),
    ProductType(
        "electronics", "smart watch", ("Wearable Technology", "Smartwatches"), "smart watch",
        ("heart rate monitor", "sleep tracking", "water resistant", "long battery life", "step counter",
         "touch screen", "blood oxygen"),
        {"color": COLORS, "size": ("38mm", "40mm", "41mm", "44mm", "45mm")}, (29.0, 230.0), UNISEX,
        ("Tracks your day from workout to bedtime.", "Notifications right on your wrist."),
    ),
    ProductType(
        "electronics", "laptop sleeve",
        ("Computers & Accessories", "Laptop Accessories", "Bags, Cases & Sleeves", "Sleeves"), "laptop sleeve",
        ("water resistant", "shock absorbing", "extra pocket", "slim design", "padded lining", "carrying handle"),
        {"color": COLORS, "size": ("13 inch", "14 inch", "15.6 inch", "16 inch", "17 inch")}, (9.0, 40.0), ("",),
        ("Slides easily into a backpack or tote.", "Soft lining guards against scratches."),
    ),
)  # fmt: skip

# Sentences shared by every product text; like the blurbs, they carry no digits and no option value.
DESCRIPTION_CLOSERS = (
    "Satisfaction guaranteed: contact us with any questions.",
    "Backed by our friendly customer service team.",
    "Thoughtfully designed and carefully inspected before shipping.",
    "A great gift for family and friends.",
    "Makes a thoughtful present for any occasion.",
)
FEATURE_LINES = (
    "a thoughtful detail that makes a real difference",
    "tested to meet our quality standards",
    "loved by customers for everyday use",
    "made to last, use after use",
    "exactly what you need, nothing you do not",
)
REVIEWS = (
    ("Exactly as described", 5, "Exactly what I was looking for. Arrived quickly and works great."),
    ("Great value", 5, "Great value for the price. I would buy the {name} again."),
    ("Pretty good", 4, "Pretty good overall. Does the job, though shipping took a while."),
    ("Love it", 5, "Love it! {Attribute}, just as promised."),
    ("Okay", 3, "It is okay. Fine for the price but not as {attribute} as I hoped."),
    ("Not for me", 2, "Not for me. The {name} was not what I expected."),
    ("Would recommend", 4, "Would recommend to a friend. Nice {name}, and {attribute} too."),
    ("Disappointed", 1, "Disappointed. Mine stopped working after a week."),
)
