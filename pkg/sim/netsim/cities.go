package netsim

import "strings"

// Region is a routing region: a group of cities whose traffic to the rest
// of the world leaves through the same hubs (hubs.go). Paths within a
// region are direct, paths between regions go through hubs, and the
// bad-route risk (badRouteWeight) is set per region. It is not a political
// or strictly continental grouping (Russia and Central Asia route through
// Moscow and Frankfurt and are Europe here; Mexico is North America).
type Region uint8

// The regions.
const (
	NorthAmerica  Region = iota // USA, Canada, Mexico
	LatinAmerica                // Central and South America, Caribbean
	Europe                      // incl. Russia, Turkey, Central Asia, Cyprus
	Africa                      // incl. Egypt and the Maghreb
	MiddleEast                  // Gulf, Levant, Iran
	SouthAsia                   // India, Pakistan, Bangladesh, Sri Lanka, Nepal
	EastAsia                    // Japan, Korea, Mongolia, Russian Far East
	GreaterChina                // mainland China, Hong Kong, Taiwan
	SoutheastAsia               // Singapore, Malaysia, Indonesia, Thailand, Vietnam, Philippines, …
	Oceania                     // Australia, New Zealand, Pacific islands, Guam
	numRegions
)

var regionNames = [numRegions]string{"north-america", "latin-america", "europe", "africa", "middle-east", "south-asia", "east-asia", "greater-china", "southeast-asia", "oceania"}

// String is the region's name, e.g. "east-asia".
func (r Region) String() string {
	if r < numRegions {
		return regionNames[r]
	}
	return "region?"
}

// City is one place relays and endpoints can be in.
type City struct {
	Name    string // English name, unique in the table
	Country string // ISO 3166-1 alpha-2
	Region  Region
	LatDeg  float64 // latitude, degrees north, rounded to 0.01°
	LonDeg  float64 // longitude, degrees east, rounded to 0.01°
	// Weight is the city's relative share of hosting: how likely a relay
	// (or an endpoint) is placed there. It is a judgement in tiers, not a
	// count: 10 for the hubs nearly every VPS and cloud provider offers
	// (Frankfurt, Amsterdam, London, Ashburn, New York, Tokyo, Singapore),
	// 5–9 for cities most large providers offer, 2–4 for those many
	// offer, 1 and below for those a few regional providers offer.
	Weight float64
}

// cities is the world's city table. Coordinates are the cities' commonly
// published latitude and longitude (public knowledge, city centre, rounded
// to 0.01°, i.e. within about 1 km; a data centre campus such as Ashburn,
// Council Bluffs, Falkenstein or Roubaix is listed under its own name).
// Weights are as described on City.Weight. North America, Europe and East
// Asia carry most of the weight, as in real VPS offerings.
var cities = []City{
	// North America
	{"Ashburn", "US", NorthAmerica, 39.04, -77.49, 10},
	{"New York", "US", NorthAmerica, 40.71, -74.01, 10},
	{"Los Angeles", "US", NorthAmerica, 34.05, -118.24, 9},
	{"San Jose", "US", NorthAmerica, 37.34, -121.89, 8},
	{"San Francisco", "US", NorthAmerica, 37.77, -122.42, 4},
	{"Seattle", "US", NorthAmerica, 47.61, -122.33, 6},
	{"Chicago", "US", NorthAmerica, 41.88, -87.63, 8},
	{"Dallas", "US", NorthAmerica, 32.78, -96.80, 8},
	{"Atlanta", "US", NorthAmerica, 33.75, -84.39, 6},
	{"Miami", "US", NorthAmerica, 25.76, -80.19, 6},
	{"Denver", "US", NorthAmerica, 39.74, -104.99, 4},
	{"Phoenix", "US", NorthAmerica, 33.45, -112.07, 4},
	{"Salt Lake City", "US", NorthAmerica, 40.76, -111.89, 3},
	{"Las Vegas", "US", NorthAmerica, 36.17, -115.14, 3},
	{"Portland", "US", NorthAmerica, 45.52, -122.68, 3},
	{"Boston", "US", NorthAmerica, 42.36, -71.06, 3},
	{"Philadelphia", "US", NorthAmerica, 39.95, -75.17, 2},
	{"Houston", "US", NorthAmerica, 29.76, -95.37, 3},
	{"Kansas City", "US", NorthAmerica, 39.10, -94.58, 2},
	{"Columbus", "US", NorthAmerica, 39.96, -83.00, 3},
	{"Minneapolis", "US", NorthAmerica, 44.98, -93.27, 2},
	{"St. Louis", "US", NorthAmerica, 38.63, -90.20, 1},
	{"Charlotte", "US", NorthAmerica, 35.23, -80.84, 2},
	{"Tampa", "US", NorthAmerica, 27.95, -82.46, 1},
	{"Detroit", "US", NorthAmerica, 42.33, -83.05, 1},
	{"Council Bluffs", "US", NorthAmerica, 41.26, -95.86, 2},
	{"Nashville", "US", NorthAmerica, 36.16, -86.78, 1},
	{"Raleigh", "US", NorthAmerica, 35.78, -78.64, 1},
	{"San Diego", "US", NorthAmerica, 32.72, -117.16, 1},
	{"Sacramento", "US", NorthAmerica, 38.58, -121.49, 1},
	{"Buffalo", "US", NorthAmerica, 42.89, -78.88, 1},
	{"Honolulu", "US", NorthAmerica, 21.31, -157.86, 1},
	{"Anchorage", "US", NorthAmerica, 61.22, -149.90, 0.5},
	{"Toronto", "CA", NorthAmerica, 43.65, -79.38, 5},
	{"Montreal", "CA", NorthAmerica, 45.50, -73.57, 4},
	{"Vancouver", "CA", NorthAmerica, 49.28, -123.12, 3},
	{"Calgary", "CA", NorthAmerica, 51.05, -114.07, 1},
	{"Ottawa", "CA", NorthAmerica, 45.42, -75.70, 1},
	{"Winnipeg", "CA", NorthAmerica, 49.90, -97.14, 0.5},
	{"Mexico City", "MX", NorthAmerica, 19.43, -99.13, 3},
	{"Queretaro", "MX", NorthAmerica, 20.59, -100.39, 2},
	{"Guadalajara", "MX", NorthAmerica, 20.67, -103.35, 1},
	{"Monterrey", "MX", NorthAmerica, 25.69, -100.32, 1},

	// Latin America
	{"Sao Paulo", "BR", LatinAmerica, -23.55, -46.63, 6},
	{"Rio de Janeiro", "BR", LatinAmerica, -22.91, -43.17, 2},
	{"Fortaleza", "BR", LatinAmerica, -3.73, -38.53, 1},
	{"Porto Alegre", "BR", LatinAmerica, -30.03, -51.23, 0.5},
	{"Brasilia", "BR", LatinAmerica, -15.79, -47.88, 0.5},
	{"Buenos Aires", "AR", LatinAmerica, -34.60, -58.38, 2},
	{"Santiago", "CL", LatinAmerica, -33.45, -70.67, 3},
	{"Lima", "PE", LatinAmerica, -12.05, -77.04, 1.5},
	{"Bogota", "CO", LatinAmerica, 4.71, -74.07, 2},
	{"Medellin", "CO", LatinAmerica, 6.24, -75.58, 0.5},
	{"Quito", "EC", LatinAmerica, -0.18, -78.47, 0.5},
	{"Caracas", "VE", LatinAmerica, 10.48, -66.90, 0.3},
	{"Montevideo", "UY", LatinAmerica, -34.90, -56.16, 0.5},
	{"Asuncion", "PY", LatinAmerica, -25.26, -57.58, 0.3},
	{"La Paz", "BO", LatinAmerica, -16.50, -68.15, 0.3},
	{"Panama City", "PA", LatinAmerica, 8.98, -79.52, 1},
	{"San Jose (Costa Rica)", "CR", LatinAmerica, 9.93, -84.08, 0.5},
	{"Guatemala City", "GT", LatinAmerica, 14.63, -90.51, 0.3},
	{"Santo Domingo", "DO", LatinAmerica, 18.49, -69.93, 0.3},
	{"San Juan", "PR", LatinAmerica, 18.47, -66.11, 0.5},

	// Europe
	{"Frankfurt", "DE", Europe, 50.11, 8.68, 10},
	{"Amsterdam", "NL", Europe, 52.37, 4.90, 10},
	{"London", "GB", Europe, 51.51, -0.13, 10},
	{"Paris", "FR", Europe, 48.86, 2.35, 7},
	{"Dublin", "IE", Europe, 53.35, -6.26, 5},
	{"Stockholm", "SE", Europe, 59.33, 18.07, 4},
	{"Helsinki", "FI", Europe, 60.17, 24.94, 3},
	{"Oslo", "NO", Europe, 59.91, 10.75, 2},
	{"Copenhagen", "DK", Europe, 55.68, 12.57, 2},
	{"Warsaw", "PL", Europe, 52.23, 21.01, 4},
	{"Prague", "CZ", Europe, 50.08, 14.44, 3},
	{"Vienna", "AT", Europe, 48.21, 16.37, 3},
	{"Zurich", "CH", Europe, 47.38, 8.54, 4},
	{"Geneva", "CH", Europe, 46.20, 6.14, 1},
	{"Milan", "IT", Europe, 45.46, 9.19, 4},
	{"Rome", "IT", Europe, 41.90, 12.50, 1},
	{"Madrid", "ES", Europe, 40.42, -3.70, 4},
	{"Barcelona", "ES", Europe, 41.39, 2.17, 1},
	{"Lisbon", "PT", Europe, 38.72, -9.14, 2},
	{"Marseille", "FR", Europe, 43.30, 5.37, 2},
	{"Brussels", "BE", Europe, 50.85, 4.35, 2},
	{"Luxembourg", "LU", Europe, 49.61, 6.13, 1},
	{"Dusseldorf", "DE", Europe, 51.23, 6.77, 2},
	{"Berlin", "DE", Europe, 52.52, 13.40, 3},
	{"Hamburg", "DE", Europe, 53.55, 9.99, 1},
	{"Munich", "DE", Europe, 48.14, 11.58, 2},
	{"Nuremberg", "DE", Europe, 49.45, 11.08, 3},
	{"Falkenstein", "DE", Europe, 50.48, 12.37, 2},
	{"Strasbourg", "FR", Europe, 48.57, 7.75, 1},
	{"Roubaix", "FR", Europe, 50.69, 3.17, 2},
	{"Gravelines", "FR", Europe, 50.99, 2.13, 1},
	{"Manchester", "GB", Europe, 53.48, -2.24, 2},
	{"Edinburgh", "GB", Europe, 55.95, -3.19, 0.5},
	{"Budapest", "HU", Europe, 47.50, 19.04, 1},
	{"Bucharest", "RO", Europe, 44.43, 26.10, 2},
	{"Sofia", "BG", Europe, 42.70, 23.32, 1.5},
	{"Belgrade", "RS", Europe, 44.79, 20.45, 0.5},
	{"Zagreb", "HR", Europe, 45.81, 15.98, 0.5},
	{"Athens", "GR", Europe, 37.98, 23.73, 1},
	{"Istanbul", "TR", Europe, 41.01, 28.98, 2},
	{"Kyiv", "UA", Europe, 50.45, 30.52, 1},
	{"Moscow", "RU", Europe, 55.76, 37.62, 3},
	{"Saint Petersburg", "RU", Europe, 59.93, 30.34, 1.5},
	{"Riga", "LV", Europe, 56.95, 24.11, 1},
	{"Vilnius", "LT", Europe, 54.69, 25.28, 1},
	{"Tallinn", "EE", Europe, 59.44, 24.75, 1},
	{"Bratislava", "SK", Europe, 48.15, 17.11, 0.5},
	{"Reykjavik", "IS", Europe, 64.15, -21.94, 0.5},
	{"Chisinau", "MD", Europe, 47.01, 28.86, 0.5},
	{"Minsk", "BY", Europe, 53.90, 27.56, 0.3},
	{"Nicosia", "CY", Europe, 35.17, 33.36, 0.5},
	{"Tbilisi", "GE", Europe, 41.72, 44.78, 0.3},
	{"Yekaterinburg", "RU", Europe, 56.84, 60.61, 0.3},
	{"Novosibirsk", "RU", Europe, 55.01, 82.93, 0.5},
	{"Almaty", "KZ", Europe, 43.24, 76.89, 0.5},
	{"Tashkent", "UZ", Europe, 41.30, 69.24, 0.3},

	// Africa
	{"Johannesburg", "ZA", Africa, -26.20, 28.05, 3},
	{"Cape Town", "ZA", Africa, -33.92, 18.42, 2},
	{"Durban", "ZA", Africa, -29.86, 31.02, 0.3},
	{"Lagos", "NG", Africa, 6.52, 3.38, 1},
	{"Nairobi", "KE", Africa, -1.29, 36.82, 1},
	{"Mombasa", "KE", Africa, -4.04, 39.67, 0.3},
	{"Cairo", "EG", Africa, 30.04, 31.24, 1},
	{"Casablanca", "MA", Africa, 33.57, -7.59, 0.5},
	{"Tunis", "TN", Africa, 36.81, 10.18, 0.3},
	{"Algiers", "DZ", Africa, 36.75, 3.06, 0.3},
	{"Accra", "GH", Africa, 5.60, -0.19, 0.5},
	{"Dakar", "SN", Africa, 14.72, -17.47, 0.3},
	{"Abidjan", "CI", Africa, 5.36, -4.01, 0.3},
	{"Luanda", "AO", Africa, -8.84, 13.23, 0.3},
	{"Dar es Salaam", "TZ", Africa, -6.79, 39.21, 0.3},
	{"Kampala", "UG", Africa, 0.35, 32.58, 0.2},
	{"Kigali", "RW", Africa, -1.95, 30.06, 0.2},
	{"Addis Ababa", "ET", Africa, 9.03, 38.74, 0.2},
	{"Djibouti", "DJ", Africa, 11.59, 43.15, 0.2},
	{"Port Louis", "MU", Africa, -20.16, 57.50, 0.2},

	// Middle East
	{"Dubai", "AE", MiddleEast, 25.20, 55.27, 2},
	{"Abu Dhabi", "AE", MiddleEast, 24.45, 54.38, 0.5},
	{"Doha", "QA", MiddleEast, 25.29, 51.53, 0.5},
	{"Manama", "BH", MiddleEast, 26.23, 50.59, 1},
	{"Riyadh", "SA", MiddleEast, 24.71, 46.68, 1},
	{"Jeddah", "SA", MiddleEast, 21.49, 39.19, 0.5},
	{"Tel Aviv", "IL", MiddleEast, 32.09, 34.78, 2},
	{"Amman", "JO", MiddleEast, 31.95, 35.93, 0.3},
	{"Kuwait City", "KW", MiddleEast, 29.38, 47.99, 0.3},
	{"Muscat", "OM", MiddleEast, 23.59, 58.41, 0.3},
	{"Tehran", "IR", MiddleEast, 35.69, 51.39, 0.5},

	// South Asia
	{"Mumbai", "IN", SouthAsia, 19.08, 72.88, 4},
	{"New Delhi", "IN", SouthAsia, 28.61, 77.21, 2},
	{"Bangalore", "IN", SouthAsia, 12.97, 77.59, 2},
	{"Chennai", "IN", SouthAsia, 13.08, 80.27, 2},
	{"Hyderabad", "IN", SouthAsia, 17.39, 78.49, 1},
	{"Pune", "IN", SouthAsia, 18.52, 73.86, 0.5},
	{"Kolkata", "IN", SouthAsia, 22.57, 88.36, 0.5},
	{"Karachi", "PK", SouthAsia, 24.86, 67.00, 0.5},
	{"Lahore", "PK", SouthAsia, 31.55, 74.34, 0.3},
	{"Dhaka", "BD", SouthAsia, 23.81, 90.41, 0.5},
	{"Colombo", "LK", SouthAsia, 6.93, 79.86, 0.3},
	{"Kathmandu", "NP", SouthAsia, 27.72, 85.32, 0.2},

	// East Asia and Greater China
	{"Tokyo", "JP", EastAsia, 35.68, 139.69, 10},
	{"Osaka", "JP", EastAsia, 34.69, 135.50, 3},
	{"Fukuoka", "JP", EastAsia, 33.59, 130.40, 0.5},
	{"Sapporo", "JP", EastAsia, 43.06, 141.35, 0.3},
	{"Seoul", "KR", EastAsia, 37.57, 126.98, 4},
	{"Busan", "KR", EastAsia, 35.18, 129.08, 0.5},
	{"Hong Kong", "HK", GreaterChina, 22.32, 114.17, 6},
	{"Taipei", "TW", GreaterChina, 25.03, 121.57, 2},
	{"Shanghai", "CN", GreaterChina, 31.23, 121.47, 2},
	{"Beijing", "CN", GreaterChina, 39.90, 116.41, 2},
	{"Shenzhen", "CN", GreaterChina, 22.54, 114.06, 1},
	{"Guangzhou", "CN", GreaterChina, 23.13, 113.26, 1},
	{"Hangzhou", "CN", GreaterChina, 30.27, 120.16, 1},
	{"Chengdu", "CN", GreaterChina, 30.57, 104.07, 0.5},
	{"Qingdao", "CN", GreaterChina, 36.07, 120.38, 0.5},
	{"Ulaanbaatar", "MN", EastAsia, 47.89, 106.91, 0.2},
	{"Vladivostok", "RU", EastAsia, 43.12, 131.89, 0.3},

	// Southeast Asia
	{"Singapore", "SG", SoutheastAsia, 1.35, 103.82, 10},
	{"Johor Bahru", "MY", SoutheastAsia, 1.49, 103.74, 0.5},
	{"Kuala Lumpur", "MY", SoutheastAsia, 3.14, 101.69, 2},
	{"Jakarta", "ID", SoutheastAsia, -6.21, 106.85, 2},
	{"Surabaya", "ID", SoutheastAsia, -7.25, 112.75, 0.3},
	{"Bangkok", "TH", SoutheastAsia, 13.76, 100.50, 2},
	{"Ho Chi Minh City", "VN", SoutheastAsia, 10.82, 106.63, 1},
	{"Hanoi", "VN", SoutheastAsia, 21.03, 105.85, 1},
	{"Manila", "PH", SoutheastAsia, 14.60, 120.98, 1},
	{"Phnom Penh", "KH", SoutheastAsia, 11.56, 104.93, 0.2},
	{"Yangon", "MM", SoutheastAsia, 16.84, 96.17, 0.2},

	// Oceania
	{"Sydney", "AU", Oceania, -33.87, 151.21, 5},
	{"Melbourne", "AU", Oceania, -37.81, 144.96, 3},
	{"Brisbane", "AU", Oceania, -27.47, 153.03, 1},
	{"Perth", "AU", Oceania, -31.95, 115.86, 1},
	{"Adelaide", "AU", Oceania, -34.93, 138.60, 0.5},
	{"Canberra", "AU", Oceania, -35.28, 149.13, 0.3},
	{"Auckland", "NZ", Oceania, -36.85, 174.76, 2},
	{"Wellington", "NZ", Oceania, -41.29, 174.78, 0.3},
	{"Suva", "FJ", Oceania, -18.14, 178.44, 0.1},
	{"Hagatna", "GU", Oceania, 13.44, 144.79, 0.2},
}

// Cities returns a copy of the city table; a Point's City() indexes it.
func Cities() []City {
	out := make([]City, len(cities))
	copy(out, cities)
	return out
}

// NumCities is the number of cities in the table.
func NumCities() int { return len(cities) }

// CityAt returns city i of the table. It panics if i is out of range.
func CityAt(i int) City { return cities[i] }

// CityIndex returns the index of the city with this name (case-insensitive),
// and whether there is one.
func CityIndex(name string) (int, bool) {
	for i, c := range cities {
		if strings.EqualFold(c.Name, name) {
			return i, true
		}
	}
	return -1, false
}
